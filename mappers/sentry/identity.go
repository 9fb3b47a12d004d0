package sentry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// Sentry-Hook-Resource is not signed: only the body is. A replayer holding a
// signed body could send it again under another resource name, so the header
// is only trusted as far as the signed body agrees with it, and the delivery
// identity is derived from the body alone.

// resourceKeys names, for each resource this package maps, the key of data
// that its payloads carry and no other resource's do.
var resourceKeys = map[string]string{
	ResourceIssue:        "issue",
	ResourceEventAlert:   "event",
	ResourceMetricAlert:  "metric_alert",
	ResourceError:        "error",
	ResourceComment:      "comment",
	ResourceInstallation: "installation",
}

// otherResource is the identity's resource part for payloads of resources
// this package does not know: their header cannot be checked against the
// body, so it is left out of the identity.
const otherResource = "other"

// resourceRE is the shape of Sentry's resource names.
var resourceRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// bodyResource returns the resource the signed body is about: the known
// resource whose data key it carries, or otherResource. It is an error when
// the header names a resource the body is not (an issue body sent as
// "comment", or as an unknown resource), or has a shape Sentry never sends.
func bodyResource(header string, data json.RawMessage) (string, error) {
	if !resourceRE.MatchString(header) {
		return "", fmt.Errorf("%s %.32q: want a lowercase resource name of at most 64 characters", HeaderResource, header)
	}
	var keys map[string]json.RawMessage
	if d := bytes.TrimSpace(data); len(d) > 0 && d[0] == '{' {
		if err := json.Unmarshal(d, &keys); err != nil {
			return "", fmt.Errorf("data: %w", err)
		}
	}
	found := otherResource
	for res, key := range resourceKeys {
		if v, ok := keys[key]; ok && string(bytes.TrimSpace(v)) != "null" {
			if found != otherResource && found != header {
				continue
			}
			found = res
		}
	}
	if want, known := resourceKeys[header]; known && found != header {
		return "", fmt.Errorf("%s is %s but the signed body has no data.%s", HeaderResource, header, want)
	}
	if _, known := resourceKeys[header]; !known && found != otherResource {
		return "", fmt.Errorf("%s is %s but the signed body is a %s payload", HeaderResource, header, found)
	}
	return found, nil
}
