"""Which path serves an input: the rule (rule.py) and the tables measured per device it reads (tables/)."""
