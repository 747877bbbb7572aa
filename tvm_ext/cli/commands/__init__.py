"""One module per ``tvm-ext`` subcommand; each defines ``register(subparsers, common)``."""
