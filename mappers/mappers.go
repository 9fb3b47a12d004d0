// Package mappers defines what every provider package under mappers/ provides
// to the webhook gateway: verification of a raw request against the provider's
// signature scheme, and the mapping of a verified request into envelopes with
// their subjects and delivery identities.
//
// Provider packages (mappers/github, mappers/slack, mappers/sentry,
// mappers/openproject) are pure: no I/O, no bus, no HTTP server. The gateway
// (services/ingest) reads the body, calls Verify then Map, publishes the items
// and answers.
package mappers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/relaystation/relay/envelope"
)

// Request is a webhook request as the gateway received it: the raw body bytes
// (signatures are computed on them) and the headers.
type Request struct {
	// Route is the path suffix after /webhooks/{provider}, for example
	// "events", "commands" or "interactions" for Slack; "" for single-route providers.
	Route string
	// Header is the request header.
	Header http.Header
	// Body is the raw body, already bounded by the gateway's size limit.
	Body []byte
	// Received is when the gateway read the request; verifiers use it for
	// timestamp windows.
	Received time.Time
}

// Item is one envelope to publish.
type Item struct {
	// Subject is relative to the bus prefix, usually envelope.Inbound(channel, event).
	Subject string
	// MsgID is the de-duplication identity (Nats-Msg-Id) derived from the
	// provider's delivery identity, so a redelivered webhook stores nothing new.
	MsgID string
	// Envelope is the schema-valid envelope.
	Envelope *envelope.Envelope
}

// Reply is a body the provider expects in the HTTP answer (Slack's
// url_verification challenge, for example). Without one the gateway answers
// 200 with an empty body.
type Reply struct {
	Status      int
	ContentType string
	Body        []byte
}

// Result is what Map produced.
type Result struct {
	// Items to publish; empty for requests that carry no event (a challenge).
	Items []Item
	// Reply, when set, is written back after every item was acknowledged.
	Reply *Reply
}

// Provider is one webhook source. Implementations are safe for concurrent use.
type Provider interface {
	// Name is the provider's route name: "github", "slack", "sentry", "openproject".
	Name() string
	// Verify checks the request's signature. It returns ErrNoSecret when no
	// secret is configured and a *SignatureError for a missing or wrong signature
	// or a stale timestamp; the gateway answers 401 to both.
	Verify(r *Request) error
	// Map turns a verified request into envelopes. A body that cannot be parsed
	// is a *ParseError (400).
	Map(r *Request) (Result, error)
}

// ErrNoSecret means the provider has no verification secret configured; its
// webhooks are refused, never accepted unverified.
var ErrNoSecret = errors.New("no webhook secret configured")

// SignatureError reports a request whose signature does not verify.
type SignatureError struct {
	Provider string
	Reason   string
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("%s signature: %s", e.Provider, e.Reason)
}

// ParseError reports a body that cannot be parsed.
type ParseError struct {
	Provider string
	Err      error
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s payload: %v", e.Provider, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// MaxContent is the default bound on bodies copied into an envelope's content.
const MaxContent = 4000

// ID is an identifier a provider sends as a JSON string or number (Sentry
// and OpenProject do both); it reads either into its decimal or string form.
type ID string

// UnmarshalJSON reads a string, a number or null.
func (v *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*v = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = ID(s)
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("id is neither a string nor a number: %s", b)
		}
		*v = ID(n.String())
	}
	return nil
}
