"""The `lanner` subcommands, one module per group; lanner.cli assembles them."""
