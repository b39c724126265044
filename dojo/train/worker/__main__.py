import os
import sys

from dojo.train.worker import hide_gpus_on_cpu_runs

hide_gpus_on_cpu_runs(os.environ)  # before main imports torch

from dojo.train.worker.main import main  # noqa: E402

sys.exit(main())
