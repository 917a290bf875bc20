"""Built-in rule files (data); installed as the package ``kpatch.rules_data``."""
