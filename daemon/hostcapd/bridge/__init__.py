"""The privilege split: per-tenant unprivileged front-ends and the root side's channel to them."""
