"""Chat templates rendered as Hugging Face's apply_chat_template does: ``template`` (load and
render), ``sandbox`` (the jinja2 environment and its budgets), ``spans`` (which tokens train),
``check`` (template lint), ``conversation`` (OpenAI / ShareGPT / Alpaca rows to messages)."""
