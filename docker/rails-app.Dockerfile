# A Rails application's image with kiqd and kiqd-ruby-runner added: kiqd fetches the app's
# Sidekiq/ActiveJob jobs and runs them in the app's own Ruby, booted once by the runner.
# Build it from the APPLICATION's root, after kiqd's image (docker/Dockerfile):
#   docker build -f docker/Dockerfile -t kiqd .                          # in kiqd's checkout
#   docker build -f /path/to/kiqd/docker/rails-app.Dockerfile -t myapp-kiqd .   # in the app
# The app ships config/kiqd.yml (docs/operations.md shows one: every class to the runner).
# The stage below stands for your application's own image: keep yours, and add the lines
# marked "kiqd".
ARG KIQD_IMAGE=kiqd:latest
FROM ${KIQD_IMAGE} AS kiqd

FROM debian:12-slim
# The application's Ruby and gems (here Debian's: Rails 6.1, Sidekiq 6.4), and the shared
# libraries kiqd links (kiqd).
RUN apt-get update && apt-get install -y --no-install-recommends \
      ruby ruby-rails ruby-sidekiq \
      libhiredis0.14 libyaml-cpp0.7 libspdlog1.10 libfmt9 zlib1g libssl3 libdate-tz3 tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 app \
 && useradd --system --uid 10001 --gid app --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin app
# kiqd: the daemon, the Ruby runner (and its library) and the health check, from kiqd's image.
COPY --from=kiqd /usr/bin/kiqd /usr/bin/kiqd-ruby-runner /usr/bin/
COPY --from=kiqd /usr/share/kiqd/ruby/lib /usr/share/kiqd/ruby/lib
COPY --from=kiqd /usr/lib/kiqd/healthcheck /usr/lib/kiqd/healthcheck
COPY --from=kiqd /usr/share/doc/kiqd/LICENSE /usr/share/doc/kiqd/LICENSE
COPY . /srv/app
# kiqd: its configuration, from the app's source tree.
COPY config/kiqd.yml /etc/kiqd/kiqd.yml
WORKDIR /srv/app
USER app:app
EXPOSE 9394
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s CMD ["/usr/lib/kiqd/healthcheck"]
ENTRYPOINT ["/usr/bin/kiqd"]
CMD ["-C", "/etc/kiqd/kiqd.yml"]
