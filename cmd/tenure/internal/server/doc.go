// Package server holds the dashboard test of package
// github.com/tenurekit/tenure/server that drives a headless chromium. It
// lives in the command's module, which requires the browser driver, so that
// the main module does not. It has only tests.
package server
