package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ratelimitd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS: with --tls-cert and --tls-key both servers speak TLS only; the
// check client connects with --tls-ca.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	p := startServer(t, map[string]string{"RATELIMITD_TLS_CERT": cert, "RATELIMITD_TLS_KEY": key})

	code, out, errOut := runCmd(t, nil, "check", "--addr", p.GRPCAddr, "--tls-ca", cert, "--identifier", "bob", "--endpoint", "/api/v1/orders")
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasPrefix(out, "allowed  rule=api-per-user"), out)
	code, _, _ = runCmd(t, nil, "check", "--addr", p.GRPCAddr, "--identifier", "bob", "--timeout", "1s")
	require.Equal(t, 1, code, "plaintext gRPC is refused")

	c := apiClient(t, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}})
	resp, err := c.Get("https://" + p.HTTPAddr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = c.Get("http://" + p.HTTPAddr + "/readyz")
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plaintext HTTP is refused")
	}

	// A missing key file is refused at start, naming the flags.
	code, _, errOut = runEnv(t, nil, "serve", "--tls-cert", cert, "--tls-key", filepath.Join(dir, "none.pem"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--tls-cert, --tls-key")
}
