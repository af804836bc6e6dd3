"""The ``docker`` backend (:mod:`.backend`: its services in :mod:`.cluster`, :mod:`.spark` with
:mod:`.driver`, :mod:`.network`; addresses in :mod:`.layout`; labels and cleanup in :mod:`.site` and
:mod:`.reaper`), and the Docker pieces it stands on: an engine that answers (:mod:`.engine`), locally
built images (:mod:`.images`) and the Compose v2 CLI plugin (:mod:`.compose`)."""
