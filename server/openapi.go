package server

import (
	_ "embed"
	"net/http"
)

// openapiJSON is the hand-written OpenAPI 3.1 description of the REST
// routes; TestOpenAPICoversRoutes keeps it in step with restTable, and
// protocol's TestOpenAPISchemasMatchTypes keeps its schemas in step with
// the protocol types.
//
//go:embed openapi.json
var openapiJSON []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiJSON)
}
