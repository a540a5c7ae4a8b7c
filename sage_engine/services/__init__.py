"""The services the Engine facade wires onto one store: memory items,
episodes (retrieval, attempts, adoption and credit), the rulebook (UGC) and
evaluation (tasks, candidates, backends). Each public method is one
transaction; none holds a transaction while a kernel is evaluated."""
