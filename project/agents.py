"""The demo site's agents (autodiscovered by memproc at start-up)."""
