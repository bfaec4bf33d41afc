package client_test

import (
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/server"
)

// testToken is the bearer token of the test servers.
const testToken = "test-token-0123456789abcdef"

// testConfig allows testToken everything, without the API's own rate limit.
func testConfig() *server.Config {
	c := server.AdminConfig(secret.New(testToken))
	c.Rate = -1
	return c
}
