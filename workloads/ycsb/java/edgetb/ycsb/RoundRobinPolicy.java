package edgetb.ycsb;

import com.datastax.oss.driver.api.core.context.DriverContext;
import com.datastax.oss.driver.api.core.metadata.Node;
import com.datastax.oss.driver.api.core.session.Request;
import com.datastax.oss.driver.api.core.session.Session;
import com.datastax.oss.driver.internal.core.loadbalancing.BasicLoadBalancingPolicy;
import java.util.Collections;
import java.util.Set;

/**
 * Every live node coordinates in turn, whatever the key: the sweep's {@code round-robin}
 * policy (the Python driver's RoundRobinPolicy). The driver's basic policy without the
 * replicas of the request's routing key is exactly that.
 */
public class RoundRobinPolicy extends BasicLoadBalancingPolicy {
  public RoundRobinPolicy(DriverContext context, String profileName) {
    super(context, profileName);
  }

  @Override
  protected Set<Node> getReplicas(Request request, Session session) {
    return Collections.emptySet();
  }
}
