"""The daemon's services: the servicers, one gRPC server per tenant
socket, each servicer bound at construction to its tenant. Only this
package translates between wire messages and the daemon's plain values."""
