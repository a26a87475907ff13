"""Why did a pod of the gang end? Disruption (restart, free) versus failure (spends the budget)."""
