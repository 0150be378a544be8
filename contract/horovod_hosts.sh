#!/bin/sh
# Host discovery of elastic Horovod (horovodrun --host-discovery-script; its driver runs this every second):
# one "host:slots" line per worker machine that may run ranks now, from $TFDIST_HOROVOD_HOSTS
# ("host:slots,host:slots,..."; tfdist.contract.HOSTS_ENV), which the local launcher sets. Nothing listed: no line, and
# Horovod waits for hosts.
printf '%s\n' "$TFDIST_HOROVOD_HOSTS" | tr ',' '\n'
