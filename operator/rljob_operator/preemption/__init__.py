"""Why a gang stops: what its nodes say of their going (`nodes`), what each pod's objects say
(`facts`), and the rules that tell a disruption (restart, free) from a failure (spends the
budget) (`classify`)."""
