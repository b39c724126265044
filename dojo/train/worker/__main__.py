import sys

from dojo.train.worker.main import main

sys.exit(main())
