"""Generated code for the hostcap.v1 protobuf package (do not edit; run
`make proto`)."""
