"""The Docker pieces of a future ``--backend docker``: an engine that answers (:mod:`.engine`), locally
built images (:mod:`.images`) and the Compose v2 CLI plugin (:mod:`.compose`)."""
