"""Helpers several test modules share; none of them is a test module, and no test module imports
another. ``runs``: a ResolvedRun or an options dict from a few values. ``procs``: `dojo train` in
the background and the processes of a run. ``train``: `dojo train` through the real launcher and
its summary. ``examples``: token-id samples and a tiny Llama. ``hub``: a Hugging Face cache laid
out as huggingface_hub writes it. ``fuzz``: hypothesis settings and strategies. ``chat_cases``:
Hugging Face's renderings of the official chat templates."""
