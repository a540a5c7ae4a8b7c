"""`python -m sage_mcp.mcp`: the stdio server, as `sage-mcp` starts it."""

import sys

from sage_mcp.mcp.server import main

sys.exit(main())
