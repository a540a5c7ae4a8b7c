'use strict';
const fs = require('node:fs');
const path = require('node:path');

/** The interpreter with SAGE installed: $SAGE_PYTHON, else the repository's .venv. */
function sagePython() {
    const python = process.env.SAGE_PYTHON || path.join(__dirname, '..', '..', '..', '.venv', 'bin', 'python');
    if (!fs.existsSync(python)) {
        throw new Error(`no Python at ${python}: set SAGE_PYTHON to an interpreter with SAGE installed`);
    }
    return python;
}

module.exports = { sagePython };
