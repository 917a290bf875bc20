"""codeobject"""
