"""`python -m sage_mcp.lsp`: the language server over stdio, as `sage-lsp`
and the VS Code extension start it."""

from sage_mcp.lsp.handlers import main

main()
