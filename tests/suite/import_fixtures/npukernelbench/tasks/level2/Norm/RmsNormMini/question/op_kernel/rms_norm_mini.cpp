// Ascend C kernel template (not imported)
