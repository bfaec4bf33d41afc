package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const rlsTestConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

// freeAddr returns a free TCP port on host.
func freeAddr(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startRLSServe runs serve with the rate limit service configured by f's
// rls fields until the test ends.
func startRLSServe(t *testing.T, f *serveFlags) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(cfg, []byte(rlsTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	f.addr, f.dataDir, f.schema, f.drain, f.rlsConfig = "127.0.0.1:0", t.TempDir(), "tenure", time.Second, cfg
	f.listening = func(a string) { started <- a }
	errc := make(chan error, 1)
	go func() { errc <- runServe(ctx, f, &lockedBuf{}, &lockedBuf{}) }()
	select {
	case <-started:
	case err := <-errc:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve stopped with %v", err)
		}
	})
}

func rlsCall(ctx context.Context, cc *grpc.ClientConn) error {
	_, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.7"}}}}})
	return err
}

// TestServeRLSRefusesOpenNetwork: the rate limit service does not listen
// on an address other hosts reach without client credentials, unless
// told to; bad credential flags are refused.
func TestServeRLSRefusesOpenNetwork(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(cfg, []byte(rlsTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("secret-token-0123456789 edge extra\n"), 0o600)
	for _, c := range []struct {
		f    serveFlags
		want string
	}{
		{serveFlags{rlsAddr: "0.0.0.0:0"}, "--rls-token-file or --rls-client-ca"},
		{serveFlags{rlsAddr: "127.0.0.1:0", rlsTokenFile: empty}, "has no token"},
		{serveFlags{rlsAddr: "127.0.0.1:0", rlsTokenFile: bad}, "want TOKEN [DOMAIN,...]"},
		{serveFlags{rlsAddr: "127.0.0.1:0", rlsTLSCert: "c.pem"}, "go together"},
		{serveFlags{rlsAddr: "127.0.0.1:0", rlsClientCA: "ca.pem"}, "needs --rls-tls-cert"},
	} {
		f := c.f
		f.addr, f.dataDir, f.schema, f.rlsConfig = "127.0.0.1:0", t.TempDir(), "tenure", cfg
		err := runServe(t.Context(), &f, &lockedBuf{}, &lockedBuf{})
		var e exitErr
		if !asExit(err, &e) || e.code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want exit 2 saying %q", c.f, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token") {
			t.Errorf("the error shows a token: %v", err)
		}
	}
	// Told to, it serves open.
	addr := freeAddr(t, "0.0.0.0")
	startRLSServe(t, &serveFlags{rlsAddr: addr, rlsInsecure: true})
}

// TestServeRLSTokens: with --rls-token-file a call needs a token allowed
// its domain, on any address.
func TestServeRLSTokens(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# envoy\nedge-token-0123456789 edge\nother-token-0123456789 internal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t, "0.0.0.0")
	startRLSServe(t, &serveFlags{rlsAddr: addr, rlsTokenFile: tokens})
	_, port, _ := net.SplitHostPort(addr)
	cc, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	if err := rlsCall(t.Context(), cc); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want Unauthenticated", err)
	}
	if err := rlsCall(with("other-token-0123456789"), cc); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a token of another domain: %v, want PermissionDenied", err)
	}
	if err := rlsCall(with("edge-token-0123456789"), cc); err != nil {
		t.Errorf("the domain's token: %v", err)
	}
}

// TestServeRLSMutualTLS: with --rls-tls-cert, --rls-tls-key and
// --rls-client-ca the service speaks TLS and refuses a client without a
// certificate signed by the CA.
func TestServeRLSMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test CA", true)
	srvCert, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := newCert(t, ca, caKey, "envoy", false)
	write := func(name string, blocks ...*pem.Block) string {
		p := filepath.Join(dir, name)
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyBlock := func(k *ecdsa.PrivateKey) *pem.Block {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	certBlock := func(c *x509.Certificate) *pem.Block { return &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw} }
	addr := freeAddr(t, "127.0.0.1")
	startRLSServe(t, &serveFlags{rlsAddr: addr, rlsTLSCert: write("srv.pem", certBlock(srvCert)), rlsTLSKey: write("srv.key", keyBlock(srvKey)),
		rlsClientCA: write("ca.pem", certBlock(ca))})
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	dial := func(tc *tls.Config) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	pair := tls.Certificate{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey}
	if err := rlsCall(t.Context(), dial(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rlsCall(ctx, dial(&tls.Config{RootCAs: roots})); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := rlsCall(ctx, plain); err == nil {
		t.Fatal("a plain-text client was served")
	}
}

// newCert makes a certificate for name signed by parent (self-signed
// when parent is nil).
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IsCA: isCA, BasicConstraintsValid: true}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
