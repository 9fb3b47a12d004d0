package mappers

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relaystation/relay/internal/telemetry"
)

// BaseURL returns raw without a trailing slash when it is an absolute
// http(s) URL: the instance an outbound API client calls. The error names the
// provider and the setting ("sentry: API URL ...").
func BaseURL(provider, setting, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%s: %s %q is not an absolute http(s) URL", provider, setting, raw)
	}
	return strings.TrimSuffix(raw, "/"), nil
}

// ClientOr returns c, or a client with a 30-second timeout when c is nil:
// the default HTTP client of the outbound API clients (traced, on the
// connections they share; telemetry.HTTPClient).
func ClientOr(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return telemetry.HTTPClient(30 * time.Second)
}

// AnswerLost reports whether err is an *APIError of a call that succeeded
// (2xx) but whose answer did not decode: what it created exists, and
// repeating the call would create it twice.
func AnswerLost(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 200 && ae.Status < 300
}
