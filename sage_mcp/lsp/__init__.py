"""The language server (`sage-lsp`): the `LanguageServer` that owns the
Engine and the editor's state (`server`), the thin protocol handlers
(`handlers`), what is shown (`views`), per-document caches (`documents`),
evaluations (`evaluations`), memory commands (`actions`), work-done progress
(`progress`), settings (`settings`) and editor configurations (`clients`)."""
