"""``python -m tvm_ext.cli ...`` runs the ``tvm-ext`` command line."""
import sys

from tvm_ext.cli.main import main

sys.exit(main())
