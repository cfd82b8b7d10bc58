"""What every layer uses and nothing here depends on torch: the user-error type, every
default once, settings declared as fields, readers of settings from text, users'
`module:function` names, and files written so that a crash never leaves half of one."""
