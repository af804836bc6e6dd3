#!/bin/sh
# kafka-server-start.sh <server.properties>: the broker (kafka.Kafka) in the foreground, logging to stdout
if [ $# -lt 1 ]; then echo "usage: kafka-server-start.sh server.properties [--override key=value]..." >&2; exit 1; fi
log4j=/opt/kafka/config/log4j2.properties
[ -f "$log4j" ] || log4j=/etc/kafka/docker/log4j2.properties
KAFKA_LOG4J_OPTS="${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$log4j}" exec /opt/kafka/bin/kafka-run-class kafka.Kafka "$@"
