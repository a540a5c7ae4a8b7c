"""The MCP server (`sage-mcp` over stdio, `sage serve` over HTTP): the
server and its lifespan (`server`), the tools (`tools`), argument errors in
the tools' own words (`arguments`), the HTTP transport behind bearer tokens
(`http`) and the client configuration files (`clients`)."""
