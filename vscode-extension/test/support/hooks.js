'use strict';
// Loaded with `node --require`: resolves `vscode` and
// `vscode-languageclient/node` to the test stand-ins for every module the
// compiled extension loads.
const Module = require('node:module');
const path = require('node:path');

const replacements = {
    vscode: path.join(__dirname, 'vscode.js'),
    'vscode-languageclient/node': path.join(__dirname, 'languageclient.js'),
};
const originalResolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
    if (Object.prototype.hasOwnProperty.call(replacements, request)) {
        return replacements[request];
    }
    return originalResolve.call(this, request, ...rest);
};
