#!/bin/sh
# kafka-storage.sh format|info|random-uuid ... (kafka.tools.StorageTool), like the distribution's script
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx256m}" \
KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/etc/kafka/docker/tools-log4j2.properties}" \
  exec /opt/kafka/bin/kafka-run-class kafka.tools.StorageTool "$@"
