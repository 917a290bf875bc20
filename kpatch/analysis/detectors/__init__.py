"""One module per finding family."""
