"""One module per tool kind; each implements ``tools.tool.Executor``."""
