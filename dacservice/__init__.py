"""The user service, a process of its own (`dac-user-service`, systemd unit dac-users): users'
dacctl commands, authenticated with munge, answered from the controller so users hold no etcd
credential (docs/security.md).

    users   the server; the client dacctl calls, `ask`, is daccore.services.user_client"""
