"""What the local and Docker backends share (neither imports the other): the Kafka broker settings
(:mod:`.broker_config`), node ports and directories (:mod:`.layout`) and their leases (:mod:`.ports`),
the start-up health check (:mod:`.health`), the jars (:mod:`.jars`), toxiproxy (:mod:`.toxiproxy`),
process groups (:mod:`.processes`), the driver's supervisor (:mod:`.supervisor`) and the
host-process part of a supervised pipeline (:mod:`.spark`)."""
