#!/bin/sh
# Generates the certificates the TLS tests and bench/tls.sh use, into DIR (created if needed),
# with the openssl command line only:
#   ca.crt/ca.key          the test CA
#   server.crt/.key        signed by the CA, for localhost and 127.0.0.1 (the right name)
#   wrong-name.crt/.key    signed by the CA, for wrong.example only
#   expired.crt/.key       signed by the CA, for localhost and 127.0.0.1, expired in 2020
#   client.crt/.key        signed by the CA, a client certificate (redis --tls-auth-clients yes)
#   other-ca.crt/.key      another CA (the "wrong CA" for a client that trusts only it)
#   other-server.crt/.key  signed by the other CA, for localhost and 127.0.0.1
# Usage: tls_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
q() { "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@"; exit 1; }; }

ca() {  # ca NAME
    q openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 \
        -subj "/CN=kiqd test $1" -keyout "$1.key" -out "$1.crt" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

# `openssl ca` (rather than `x509 -req`) so that a certificate can have dates in the past.
cat > ca.cnf <<CNF
[ca]
default_ca = test_ca
[test_ca]
dir = .
database = index.txt
new_certs_dir = issued
serial = serial
default_md = sha256
policy = anything
copy_extensions = copy
unique_subject = no
[anything]
commonName = supplied
CNF
mkdir -p issued
: > index.txt
echo 1000 > serial

leaf() {  # leaf NAME SAN EXTENDED_USAGE [START END]
    q openssl req -new -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$1.key" -out "$1.csr" \
        -addext "subjectAltName=$2" -addext "extendedKeyUsage=$3"
    if [ $# -ge 5 ]; then dates="-startdate $4 -enddate $5"; else dates="-days 3650"; fi
    # shellcheck disable=SC2086
    q openssl ca -batch -config ca.cnf -cert ca.crt -keyfile ca.key $dates -in "$1.csr" \
        -out "$1.crt" -notext
    rm -f "$1.csr"
}

ca ca
ca other-ca
leaf server "DNS:localhost,IP:127.0.0.1" serverAuth
leaf wrong-name "DNS:wrong.example" serverAuth
leaf expired "DNS:localhost,IP:127.0.0.1" serverAuth 20200101000000Z 20200102000000Z
leaf client "DNS:kiqd-client" clientAuth
q openssl req -new -newkey rsa:2048 -nodes -subj "/CN=other-server" -keyout other-server.key \
    -out other-server.csr -addext "subjectAltName=DNS:localhost,IP:127.0.0.1"
q openssl x509 -req -in other-server.csr -CA other-ca.crt -CAkey other-ca.key -CAcreateserial \
    -days 3650 -copy_extensions copy -out other-server.crt
rm -f other-server.csr
chmod 600 ./*.key
