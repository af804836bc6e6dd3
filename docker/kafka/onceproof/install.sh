#!/bin/sh
# Lays out onceproof's Kafka node in the image (run once by the Dockerfile), unless the base image is
# already a Kafka image with the official layout (apache/kafka), whose scripts are then kept.
set -eu
src=/opt/onceproof/kafka
if [ -x /etc/kafka/docker/run ] && [ -x /opt/kafka/bin/kafka-server-start.sh ]; then
  echo "onceproof: the base image is a Kafka image (official layout): keeping its scripts"
  exit 0
fi
if ! ls /opt/kafka/libs/kafka_2.13-*.jar >/dev/null 2>&1; then
  echo "onceproof: no /opt/kafka/libs/kafka_2.13-*.jar in the build context (libs/): run 'onceproof deps'" >&2
  exit 1
fi
command -v java >/dev/null || { echo "onceproof: the base image has no java: build on onceproof/jre" >&2; exit 1; }
install -d /opt/kafka/bin /opt/kafka/config /etc/kafka/docker /mnt/shared/config /var/lib/kafka/data
install -m 0755 "$src"/bin/* /opt/kafka/bin/
install -m 0755 "$src"/run /etc/kafka/docker/run
install -m 0644 "$src"/etc/* /etc/kafka/docker/
