package console

import (
	"errors"
	"fmt"
	"strings"

	"github.com/relaystation/relay/secret"
)

// Operator is a named console operator with a token of their own
// (RELAY_CONSOLE_OPERATORS).
type Operator struct {
	Name  string
	Token secret.Value
}

// ParseOperators parses RELAY_CONSOLE_OPERATORS: "name=token" pairs
// separated by commas or new lines (a file named by
// RELAY_CONSOLE_OPERATORS_FILE holds one a line; lines starting with # are
// comments). Names are letters, digits and . _ - @ (up to 64); tokens are at
// least MinTokenLen characters; neither repeats. Errors never hold a token.
func ParseOperators(s string) ([]Operator, error) {
	var out []Operator
	for i, item := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		item = strings.TrimSpace(item)
		if item == "" || strings.HasPrefix(item, "#") {
			continue
		}
		name, token, ok := strings.Cut(item, "=")
		name, token = strings.TrimSpace(name), strings.TrimSpace(token)
		if !ok || token == "" {
			return nil, fmt.Errorf("entry %d: want name=token", i+1)
		}
		out = append(out, Operator{Name: name, Token: secret.New(token)})
	}
	if err := checkOperators(out, secret.Value{}); err != nil {
		return nil, err
	}
	return out, nil
}

// checkOperators reports a bad name, a short token, or a name or token
// given twice (also the shared token), naming the operator, never a token.
func checkOperators(ops []Operator, shared secret.Value) error {
	names := map[string]bool{}
	tokens := map[string]string{}
	if shared.IsSet() {
		tokens[shared.Reveal()] = "RELAY_CONSOLE_TOKEN"
	}
	var errs []error
	for _, o := range ops {
		switch {
		case !validOperator(o.Name):
			errs = append(errs, fmt.Errorf("operator %q: a name is letters, digits and . _ - @, up to 64", o.Name))
		case names[o.Name]:
			errs = append(errs, fmt.Errorf("operator %q is named twice", o.Name))
		case o.Name == LocalOperator:
			errs = append(errs, fmt.Errorf("operator %q: the name of the tokenless loopback console is reserved", o.Name))
		case len(o.Token.Reveal()) < MinTokenLen:
			errs = append(errs, fmt.Errorf("operator %q: token too short, at least %d characters (make one with: openssl rand -hex 24)", o.Name, MinTokenLen))
		case tokens[o.Token.Reveal()] != "":
			errs = append(errs, fmt.Errorf("operator %q: the same token as %s", o.Name, tokens[o.Token.Reveal()]))
		}
		names[o.Name] = true
		if _, dup := tokens[o.Token.Reveal()]; !dup {
			tokens[o.Token.Reveal()] = "operator " + o.Name
		}
	}
	return errors.Join(errs...)
}
