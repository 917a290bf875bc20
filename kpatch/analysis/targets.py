"""The processors kpatch analyses code for (``kpatch scan --target``): a
light module, so that the command line can offer the choice without
importing the analysis engine and numpy."""

SUPPORTED_TARGETS = ("gfx1010",)
