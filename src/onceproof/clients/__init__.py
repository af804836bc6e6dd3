"""The harness's own Kafka clients, shared by every backend: topic admin, watermarks and LSOs, whole-topic
reads at read_committed (``topics``), and the live reader that watches the output during a run
(``live_reader``). The workload's producer is a workload's client and lives in ``workloads/``."""
