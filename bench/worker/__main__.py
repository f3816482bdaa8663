import sys

from bench.worker.main import main

sys.exit(main())
