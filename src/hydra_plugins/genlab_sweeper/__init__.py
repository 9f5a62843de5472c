"""genlab's Hydra plugins (Hydra only loads sweepers from the ``hydra_plugins`` namespace)."""
