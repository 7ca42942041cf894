# stockd's container image. Two stages: the first builds stockd (and the load driver
# stockload, and stock-writer, the order writer of mode redis-stock) with Debian 12's
# -dev packages and CMake; the second is Debian 12 with only the shared libraries those
# binaries load, so no compiler or header ships. Both start from debian:12, the one base
# image of every Dockerfile here.
# docker-compose.yml runs three of these behind nginx (docker/nginx).
#
#   docker build -t stockd:local .
#   docker run --rm -e STOCKD_MYSQL_PASSWORD=... stockd:local \
#       --mysql mysql://stockd@db:3306/shop --zk zk:2181 --lock zk --instance stockd-1

FROM debian:12 AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config \
        libmicrohttpd-dev libzookeeper-mt-dev default-libmysqlclient-dev \
        libcjson-dev libcurl4-openssl-dev libhiredis-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Tests are not built here: they need MariaDB, ZooKeeper and nginx and run on the host.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
    && cmake --build /build -j"$(nproc)" --target stockd stockload stock-writer

FROM debian:12
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libzookeeper-mt2 libmariadb3 libcjson1 libcurl4 libhiredis0.14 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin stockd
COPY --from=build /build/service/stockd /build/loadtest/stockload /build/writer/stock-writer \
    /usr/local/bin/
USER stockd

# stockd reads STOCKD_PORT when --port is not given; the healthcheck reads it too.
# The MySQL password comes from STOCKD_MYSQL_PASSWORD at run time, never from the image.
ENV STOCKD_PORT=8080
EXPOSE 8080
# Healthy when /health answers 200 (MySQL reachable, and ZooKeeper when the lock mode
# uses it). The image has no curl, so bash's /dev/tcp speaks the HTTP. A container that
# runs the order writer instead (docker-compose.yml's writer: entrypoint stock-writer) is
# healthy while it reaches Redis and MariaDB (--reconcile exits 4 when it cannot).
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
    CMD ["bash", "-c", "if [ \"$(cat /proc/1/comm)\" = stock-writer ]; then stock-writer --reconcile >/dev/null; [ $? -ne 4 ]; exit; fi; exec 3<>/dev/tcp/127.0.0.1/${STOCKD_PORT:-8080} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && read -r _ code _ <&3 && [ \"$code\" = 200 ]"]
# Inside a container stockd must listen on all interfaces (its default is loopback).
ENTRYPOINT ["stockd", "--bind", "0.0.0.0"]
CMD []
