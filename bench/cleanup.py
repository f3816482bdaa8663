"""`python -m bench.cleanup RUN_DIR`: stop this host's ranks of a run by their recorded PIDs.

The command a sysadmin types after bench itself was killed; the code is
bench.launch.cleanup (see there for what is killed and why nothing else is).
"""

import sys

from bench.launch.cleanup import main

if __name__ == "__main__":
    sys.exit(main())
