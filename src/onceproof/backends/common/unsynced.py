""":class:`onceproof.backends.base.UnsyncedLoss` through one lazyfs layer per node, the same on every backend
that has such layers: the local cluster's (``lazyfs.Layer``, a process here) and the ssh cluster's
(``backends/ssh/lazyfs_layer.RemoteLayer``, a process on the node). A layer answers ``report()`` and
``crash()`` (``lazyfs.LazyOps``'s evidence) and raises ``OSError`` or ``RuntimeError`` when it does not."""

from __future__ import annotations

from onceproof.backends.base import BackendError


class LayerLoss:
    """Mixed into a cluster that has ``layers`` (node → its running layer), ``kill(node)`` and
    ``unsynced_unavailable()``."""

    def _layer(self, node: int):
        why = self.unsynced_unavailable()
        if why:
            raise BackendError(f"broker {node} cannot lose unsynced writes: {why}")
        if node not in self.layers:
            raise BackendError(f"broker {node} has no lazyfs layer running (the cluster is not up)")
        return self.layers[node]

    def unsynced(self, node: int) -> dict:
        """The layer's report: what :meth:`lose_unsynced` would drop now. Raises ``BackendError``."""
        try:
            return self._layer(node).report()
        except (OSError, RuntimeError) as e:
            raise BackendError(f"broker {node}'s lazyfs layer did not answer: {e}") from e

    def lose_unsynced(self, node: int) -> dict:
        """``kill`` ``node`` (waited for), then the layer's ``crash``: its evidence plus ``killed``.
        Raises ``BackendError``."""
        layer = self._layer(node)
        killed = self.kill(node)
        try:
            out = layer.crash()
        except (OSError, RuntimeError) as e:
            raise BackendError(f"broker {node}'s lazyfs layer could not drop its unsynced writes: {e}") from e
        out.pop("ok", None)
        return {"killed": {"pid": killed.pid, "status_after": killed.status}, **out}
