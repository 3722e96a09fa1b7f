"""The models, pure and below the experiments: which acks a consistency level needs
(``consistency``) and the write RTT a cell should show (``rtt``, the front of its parts:
``tcp``, ``scenario``, ``prediction``, ``simulation``). Nothing here starts,
measures or stores anything; ``experiments`` plans with them and ``analysis`` compares
them with what was measured.
"""
