from kpatch.cli import entry

if __name__ == "__main__":  # pragma: no cover
    entry()
