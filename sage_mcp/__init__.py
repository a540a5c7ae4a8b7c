"""SAGE's surfaces, each shaped like its SDK: `mcp/` (the MCP server), `lsp/`
(the language server) and `cli/` (the `sage` command). Each calls the
engine only through `sage_engine.engine.Engine` and its models."""
