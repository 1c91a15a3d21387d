package server

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

func signRaw(secret []byte, claims map[string]any) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString(secret)
}

func websocketDialNoProto(ctx context.Context, url, token string) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
}

func closeStatusOf(err error) websocket.StatusCode { return websocket.CloseStatus(err) }
