package tools

// omitNullOptional returns args without the null values of arguments the
// input schema does not require: a model (or a client such as the
// conformance suite) writes "verbose": null for an optional boolean it does
// not set, which means "not given", not a null boolean. args is not
// changed; nil becomes an empty object.
func omitNullOptional(args map[string]any, inputSchema any) map[string]any {
	out := make(map[string]any, len(args))
	var required map[string]bool
	for k, v := range args {
		if v != nil {
			out[k] = v
			continue
		}
		if required == nil {
			required = requiredOf(inputSchema)
		}
		if required[k] {
			out[k] = nil // the schema decides whether null is allowed
		}
	}
	return out
}

// requiredOf is the set of a schema's top-level "required" names.
func requiredOf(schema any) map[string]bool {
	out := map[string]bool{}
	m, _ := schema.(map[string]any)
	switch req := m["required"].(type) {
	case []any:
		for _, r := range req {
			if s, ok := r.(string); ok {
				out[s] = true
			}
		}
	case []string:
		for _, s := range req {
			out[s] = true
		}
	}
	return out
}
