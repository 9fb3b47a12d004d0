package tools

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// SubjectValidate answers ValidateRequest with ValidateResponse: how the
// runner would load a candidate mcp.json, in its own environment (the
// ${env:NAME} it can read, its data dir and its config's folder), before
// anyone writes it. `relay mcp install` asks it.
const SubjectValidate = "rpc.tool.validate"

// ValidateRequest carries a candidate mcp.json for the file at Path.
type ValidateRequest struct {
	Path   string `json:"path"`
	Config string `json:"config"`
}

// ValidateResponse answers ValidateRequest. ConfigPath is the absolute path
// of the mcp.json the runner reads; when it is not the request's Path the
// runner's answer does not apply to that file and Invalid is empty.
type ValidateResponse struct {
	ConfigPath string         `json:"config_path"`
	Invalid    []InvalidEntry `json:"invalid"`
	Error      string         `json:"error,omitempty"`
}

func validateError(e *rpc.Error) any {
	return ValidateResponse{Invalid: []InvalidEntry{}, Error: e.Message}
}

// ValidateEndpoint answers SubjectValidate for the runner that reads the
// mcp.json at path with opts: the entries of the candidate it would refuse,
// each with its reason. Serve takes it as an extra endpoint.
func ValidateEndpoint(prefix, path string, opts mcpconfig.Options) rpc.Endpoint {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return rpc.Endpoint{Name: "validate", Subject: prefix + "." + SubjectValidate, ErrorBody: validateError,
		Handle: func(_ context.Context, data []byte) (any, error) {
			var req ValidateRequest
			if err := json.Unmarshal(data, &req); err != nil {
				e := rpc.Errorf(rpc.CodeBadRequest, "bad request: %v", err)
				return validateError(e), e
			}
			resp := ValidateResponse{ConfigPath: path, Invalid: []InvalidEntry{}}
			if filepath.Clean(req.Path) != path {
				return resp, nil
			}
			f, err := mcpconfig.ParseFileAt(path, []byte(req.Config), opts)
			if err != nil {
				e := rpc.Errorf(rpc.CodeBadRequest, "%v", err)
				return validateError(e), e
			}
			for _, iv := range f.Invalid {
				resp.Invalid = append(resp.Invalid, InvalidEntry{Name: iv.Name, ID: iv.ID, Reason: iv.Reason()})
			}
			return resp, nil
		}}
}

// ValidateRemote asks a running tool runner how it would load config as the
// mcp.json at path (absolute). No runner is ErrNoRunner, at once.
func ValidateRemote(ctx context.Context, nc Requester, prefix, path string, config []byte) (*ValidateResponse, error) {
	var resp ValidateResponse
	if err := request(ctx, nc, prefix+"."+SubjectValidate, ValidateRequest{Path: path, Config: string(config)}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, &rpc.Error{Code: rpc.CodeBadRequest, Message: resp.Error}
	}
	return &resp, nil
}
