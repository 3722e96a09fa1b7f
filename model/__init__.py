"""The models, pure and below the experiments: which acks a consistency level needs
(``consistency``) and the write RTT a cell should show (``rtt``). Nothing here starts,
measures or stores anything; ``experiments`` plans with them and ``analysis`` compares
them with what was measured.
"""
